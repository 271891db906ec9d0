"""
Grants of the admin API (Pulsar's ``grantPermissionOnNamespace`` / ``grantPermissionOnTopic`` and
their revocations): actions given to a role, stored in the namespace's Policies under
``auth_policies.namespace_auth[role]`` and ``auth_policies.destination_auth[topic][role]``.
``security/authz.py`` evaluates them; only this module changes them.
"""

import copy

from pulsar_twisted.broker.admin.base import AdminArea
from pulsar_twisted.broker.admin.errors import PreconditionFailed
from pulsar_twisted.common.naming import TopicName
from pulsar_twisted.resources.policies import check_auth_actions, with_defaults


class PermissionsAdmin(AdminArea):
    """``PermissionsAdmin(context, namespaces)``: changes go through ``namespaces.change_policies``
    (a NamespacesAdmin), so they apply at once."""

    def __init__(self, context, namespaces):
        super().__init__(context)
        self.namespaces = namespaces

    # ---------------------------------------------------------------- namespace grants
    async def get_permissions(self, tenant, ns) -> dict:
        policies = await self.namespaces.get_policies(tenant, ns)
        return policies["auth_policies"].get("namespace_auth", {})

    async def grant_permission(self, tenant, ns, role: str, actions) -> None:
        actions = check_auth_actions(actions)

        def change(p):
            auth = copy.deepcopy(with_defaults(p, self.cluster)["auth_policies"])
            auth["namespace_auth"][role] = actions
            p["auth_policies"] = auth
            return p
        await self.namespaces.change_policies(tenant, ns, change)

    async def revoke_permission(self, tenant, ns, role: str) -> None:
        def change(p):
            auth = copy.deepcopy(with_defaults(p, self.cluster)["auth_policies"])
            if role not in auth["namespace_auth"]:
                raise PreconditionFailed(f"Role {role} has no permission on the namespace")
            del auth["namespace_auth"][role]
            p["auth_policies"] = auth
            return p
        await self.namespaces.change_policies(tenant, ns, change)

    # ---------------------------------------------------------------- topic grants
    async def topic_permissions(self, name: TopicName) -> dict:
        """``{role: [actions]}`` granted on the topic ``name`` itself."""
        policies = await self.namespaces.get_policies(name.tenant, name.namespace)
        return ((policies.get("auth_policies") or {}).get("destination_auth") or {}).get(str(name), {})

    async def grant_topic_permission(self, name: TopicName, role: str, actions) -> None:
        """Grant ``actions`` to ``role`` on topic ``name`` (stored in its namespace's policies)."""
        actions = check_auth_actions(actions)

        def change(policies):
            auth = copy.deepcopy(policies.get("auth_policies") or {})
            auth.setdefault("namespace_auth", {})
            auth.setdefault("destination_auth", {}).setdefault(str(name), {})[role] = actions
            policies["auth_policies"] = auth
            return policies
        await self.namespaces.change_policies(name.tenant, name.namespace, change)

    async def revoke_topic_permission(self, name: TopicName, role: str) -> None:
        """Revoke every action of ``role`` on topic ``name`` (412 when it had none, as Pulsar)."""
        def change(policies):
            auth = copy.deepcopy(policies.get("auth_policies") or {})
            topic = (auth.get("destination_auth") or {}).get(str(name)) or {}
            if role not in topic:
                raise PreconditionFailed(f"Role {role} has no permission on topic {name}")
            del topic[role]
            if not topic:
                del auth["destination_auth"][str(name)]
            else:
                auth["destination_auth"][str(name)] = topic
            policies["auth_policies"] = auth
            return policies
        await self.namespaces.change_policies(name.tenant, name.namespace, change)
