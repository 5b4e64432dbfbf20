"""Who may use the local runtime's Redis, and how: a user per part that writes (the real-time
views job), a read-only user for the parts that only read the views, and no anonymous user.

Redis keeps them in an ACL file (users with SHA-256 digests of their passwords, so the file holds
no password); each part gets a ``rediss://user:password@...`` URL in the resolved view.
"""

from __future__ import annotations

import hashlib
from urllib.parse import quote

from conveyor.runtime.security import LocalSecurity

WRITER, READER = "conveyor-realtime", "conveyor-reader"
#: Every data command on every key for the views job (its Lua scripts, SCAN and DEL when it
#: rebuilds); reads only for the readers. Neither administers the server (CONFIG, FLUSHALL,
#: SHUTDOWN, ACL, KEYS are @admin or @dangerous); both may ask a Redis Cluster where slots live.
RULES = {
    WRITER: "~* &* +@all -@admin -@dangerous",
    READER: "~* +@read +@connection -@dangerous +cluster|slots +cluster|shards +cluster|nodes +cluster|info",
}


#: Nobody can log in as the default user: it has no password and is not ``nopass``. It stays on,
#: with every right, because Redis (7.0 as Debian ships it) replays the append-only file as the
#: default user and checks each transaction's commands against its rights again at EXEC: a default
#: user that is off drops every MULTI/EXEC of the file, the Lua scripts' writes among them, at each
#: restart (Redis issue 14541, fixed upstream by pull request 14545).
DEFAULT_USER = "user default on resetpass ~* &* +@all"


def acl_file(passwords: dict[str, str]) -> str:
    """The ACL file of users ``passwords`` names (each of RULES), and a default user nobody can log in as."""
    lines = [DEFAULT_USER]
    lines += [f"user {user} on #{hashlib.sha256(password.encode()).hexdigest()} {RULES[user]}"
              for user, password in sorted(passwords.items())]
    return "\n".join(lines) + "\n"


def redis_url(port: int, user: str, password: str, host: str = "127.0.0.1", tls: bool = True) -> str:
    return f"{'rediss' if tls else 'redis'}://{quote(user, safe='')}:{quote(password, safe='')}@{host}:{port}/0"


def passwords(material: LocalSecurity) -> dict[str, str]:
    """Each user's password, kept with the clusters' principals (made the first time)."""
    return {user: material.service_password(f"redis:{user}") for user in RULES}
