"""A recording stand-in of pulsar-admin's HTTP client, for the verb tests."""


class RecordingClient:
    """AdminClient's four verbs: each request recorded as ``(method, path, body)`` (with
    ``queries``: ``(method, path, body, query)``); answers from ``answers[(method, path)]`` (a
    list is consumed one answer per call)."""

    def __init__(self, answers=None, queries: bool = False):
        self.answers = answers or {}
        self.requests = []
        self.queries = queries

    def _call(self, method, path, body=None, query=None, **kw):
        self.requests.append((method, path, body, query) if self.queries else (method, path, body))
        answer = self.answers.get((method, path))
        if isinstance(answer, list):
            return answer.pop(0)
        return answer

    def get(self, path, **kw):
        return self._call("GET", path, **kw)

    def put(self, path, body=None, **kw):
        return self._call("PUT", path, body, **kw)

    def post(self, path, body=None, **kw):
        return self._call("POST", path, body, **kw)

    def delete(self, path, **kw):
        return self._call("DELETE", path, **kw)
