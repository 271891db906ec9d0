"""
``/admin/v2/bookies`` (Pulsar's ``BookiesBase``): the bookies registered with the cluster's
metadata, and the rack placement operators give them.

Rack placement is one JSON document at ``/bookies`` (``layout.BOOKIE_RACKS_PATH``), Pulsar's
``{group: {bookie address: {"rack": ..., "hostname": ...}}}`` that its rack-aware placement policy
reads. It is kept and served here; our ensemble placement does not consult it yet.
"""

import json

from pulsar_twisted.broker.admin.base import AdminArea
from pulsar_twisted.broker.admin.errors import BadRequest, NotFound
from pulsar_twisted.metadata.interfaces import AlreadyExistsError, BadVersionError, NotFoundError
from pulsar_twisted.metadata.layout import BOOKIE_RACKS_PATH
from pulsar_twisted.resources.bookies import registered_bookies


class BookiesAdmin(AdminArea):
    """Bookie list and rack placement over the metadata store."""

    async def all_bookies(self) -> dict:
        """Pulsar's BookiesClusterInfo: every registered bookie, writable and read-only."""
        writable, readonly = await registered_bookies(self.context.store)
        return {"bookies": [{"bookieId": bookie} for bookie in sorted(writable | readonly)]}

    async def _read(self):
        """``(placement document, node version)``; ``({}, None)`` when there is none."""
        node = await self.context.store.get(BOOKIE_RACKS_PATH)
        if node is None:
            return {}, None
        data, stat = node
        try:
            document = json.loads(data or b"{}")
        except ValueError:
            document = {}
        return (document if isinstance(document, dict) else {}), stat.version

    async def racks_info(self) -> dict:
        return (await self._read())[0]

    async def rack_of(self, bookie: str) -> dict:
        for members in (await self._read())[0].values():
            if bookie in members:
                return members[bookie]
        raise NotFound(f"Bookie address not found: {bookie}")

    async def set_rack(self, bookie: str, group: str, info) -> None:
        """Place ``bookie`` in ``group`` with ``info`` (``{"rack", "hostname"}``), moving it out
        of any other group, as Pulsar's updateBookieRackInfo does."""
        if not isinstance(info, dict) or not str(info.get("rack") or "").strip("/ "):
            raise BadRequest("Bookie rack info must name a rack")
        entry = {"rack": str(info["rack"])}
        if info.get("hostname"):
            entry["hostname"] = str(info["hostname"])
        await self._update(lambda document: _placed(document, bookie, group or "default", entry))

    async def delete_rack(self, bookie: str) -> None:
        document = (await self._read())[0]
        if not any(bookie in members for members in document.values()):
            raise NotFound(f"Bookie address not found: {bookie}")
        await self._update(lambda doc: _placed(doc, bookie, None, None))

    async def _update(self, change) -> None:
        """Read-modify-write of the placement document, retried when another writer won."""
        while True:
            document, version = await self._read()
            data = json.dumps(change(document)).encode()
            try:
                await self.context.store.put(BOOKIE_RACKS_PATH, data,
                                             expected_version=-1 if version is None else version)
                return
            except (BadVersionError, AlreadyExistsError, NotFoundError):
                continue  # another writer changed it meanwhile: apply the change to theirs


def _placed(document: dict, bookie: str, group, entry) -> dict:
    """``document`` with ``bookie`` removed from every group, then added to ``group`` (if any);
    groups left empty are dropped."""
    out = {}
    for name, members in document.items():
        kept = {b: i for b, i in (members or {}).items() if b != bookie}
        if kept:
            out[name] = kept
    if group is not None:
        out.setdefault(group, {})[bookie] = entry
    return out
