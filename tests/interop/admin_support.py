"""
``AdminInteropCase``: ``InteropCase`` plus the admin REST calls that policy interop tests share —
``rest()`` against the class's standalone and ``namespace()``, a fresh namespace per test.
"""

import json
import urllib.request
import uuid

from tests.interop.test_core import InteropCase


class AdminInteropCase(InteropCase):
    #: Start of the names of the namespaces ``namespace()`` creates (the rest is random).
    namespace_prefix = "admin"

    def rest(self, method: str, path: str, body=None) -> int:
        """``method`` on the standalone's admin ``path`` with ``body`` as JSON; the HTTP status
        (an error status raises ``urllib.error.HTTPError``)."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.standalone.web_service_url + path, data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status

    def namespace(self) -> str:
        """A new namespace under ``public`` with default policies; its local name."""
        ns = f"{self.namespace_prefix}-{uuid.uuid4().hex[:8]}"
        self.rest("PUT", f"/admin/v2/namespaces/public/{ns}", {})
        return ns
