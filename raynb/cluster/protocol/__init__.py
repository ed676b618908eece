"""The wire, shared by every process: every message type (one registry), its framing,
signing, schema checks, rejects, chunking, CurveZMQ authentication and the control
request/reply."""
