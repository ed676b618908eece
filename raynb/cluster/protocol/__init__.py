"""The wire: every message type (one registry), its framing, signing, schema checks, rejects, chunking, CurveZMQ authentication and the control request/reply. Shared by every process."""
