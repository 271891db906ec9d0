"""
Authorization: what a role may do (Pulsar's ``PulsarAuthorizationProvider``).

The rules, in order:

* ``superUserRoles`` may do everything;
* a tenant's ``adminRoles`` (TenantInfo) may manage that tenant's namespaces and topics, and
  produce to / consume from its topics;
* otherwise topic operations need the action (``produce``, ``consume``, ``functions``...) granted
  to the role on the namespace (policies ``auth_policies.namespace_auth[role]``) or on the topic
  (``auth_policies.destination_auth[topic][role]``; a partition inherits its partitioned topic's
  grants). A lookup needs ``produce`` or ``consume``.

Permissions are read from the metadata store at each check (at PRODUCER / SUBSCRIBE / LOOKUP and
per admin request, never per message), so a grant or a revoke applies to the next request.
Refusals are ``AuthorizationError`` whose message says which role lacked which action where.
This module only evaluates grants; the admin API changes them (``broker/admin/permissions.py``).
"""

from pulsar_twisted.common.errors import AuthorizationError
from pulsar_twisted.resources.base import CorruptMetadataError
from pulsar_twisted.resources.namespaces import NamespaceResources
from pulsar_twisted.resources.tenants import TenantResources


class AuthorizationService:
    """Permission checks over the metadata store. ``enabled`` mirrors ``authorizationEnabled``."""

    def __init__(self, config, store):
        self.enabled = config.authorizationEnabled
        self.super_users = frozenset(config.superUserRoles)
        self.store = store
        self.tenants = TenantResources(store)
        self.namespaces = NamespaceResources(store)

    def is_super_user(self, role) -> bool:
        return role is not None and role in self.super_users

    @staticmethod
    async def _document(read, key) -> dict:
        """A stored document, {} when absent or unreadable (nothing is granted by it then)."""
        try:
            value = await read(key)
        except CorruptMetadataError:
            return {}
        return value if isinstance(value, dict) else {}

    async def is_tenant_admin(self, tenant: str, role) -> bool:
        """Whether ``role`` is a super user or one of ``tenant``'s adminRoles."""
        if role is None:
            return False
        if self.is_super_user(role):
            return True
        info = await self._document(self.tenants.get, tenant)
        return role in (info.get("adminRoles") or [])

    async def topic_actions(self, topic_name, role) -> set:
        """The actions granted to ``role`` on ``topic_name`` (namespace and topic grants)."""
        policies = await self._document(self.namespaces.get, topic_name.namespace_name)
        auth = policies.get("auth_policies") or {}
        actions = set((auth.get("namespace_auth") or {}).get(role) or [])
        destinations = auth.get("destination_auth") or {}
        for name in {str(topic_name), str(topic_name.partitioned_topic_name)}:
            actions.update((destinations.get(name) or {}).get(role) or [])
        return actions

    async def allowed(self, topic_name, role, action: str) -> bool:
        """Whether ``role`` may ``action`` (produce, consume, lookup, ...) on ``topic_name``."""
        if not self.enabled:
            return True
        if role is None:
            return False
        if await self.is_tenant_admin(topic_name.tenant, role):
            return True
        actions = await self.topic_actions(topic_name, role)
        if action == "lookup":
            return bool(actions & {"produce", "consume"})
        return action in actions

    async def namespace_allows(self, namespace_name, role, action: str) -> bool:
        """Whether ``role`` may ``action`` on the whole namespace: a tenant admin, or the action
        granted on the namespace itself (Pulsar's namespace operations such as GET_TOPICS look at
        namespace grants only, not at the grants of single topics)."""
        if not self.enabled:
            return True
        if role is None:
            return False
        if await self.is_tenant_admin(namespace_name.tenant, role):
            return True
        policies = await self._document(self.namespaces.get, namespace_name)
        auth = policies.get("auth_policies") or {}
        return action in set((auth.get("namespace_auth") or {}).get(role) or [])

    async def check(self, topic_name, role, action: str) -> None:
        """``AuthorizationError`` unless ``role`` may ``action`` on ``topic_name``."""
        if not await self.allowed(topic_name, role, action):
            raise AuthorizationError(f"Role {role} is not authorized to {action} on {topic_name}")

    async def check_tenant_admin(self, tenant: str, role) -> None:
        if self.enabled and not await self.is_tenant_admin(tenant, role):
            raise AuthorizationError(f"Role {role} is not an admin of tenant {tenant}")

    def check_super_user(self, role) -> None:
        if self.enabled and not self.is_super_user(role):
            raise AuthorizationError(f"Role {role} is not a super user")
