"""``pipetune keys create NAME [--scope S ...] | list [--json] | revoke ID``: the API keys
of the server's database.

``create`` prints the key's secret once (it is stored only hashed: a lost key is revoked
and replaced). Scopes: ``read`` (look), ``tune`` (start, resume, cancel one's own runs),
``admin`` (cancel or resume anyone's); each implies the ones before it.
"""

from __future__ import annotations

import argparse
import json
import sys

from service.auth.principal import SCOPES
from service.commands._database import add_database_option, open_database


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("keys", help="create, list or revoke API keys",
                                   description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    create = actions.add_parser("create", help="a new key; prints its secret once")
    create.add_argument("name", help="who or what the key is for (shown in lists and errors)")
    create.add_argument("--scope", action="append", choices=SCOPES, dest="scopes",
                        help="repeatable (default: tune)")
    listing = actions.add_parser("list", help="the keys (never their secrets)")
    listing.add_argument("--json", action="store_true", help="print a JSON list")
    revoke = actions.add_parser("revoke", help="revoke a key at once")
    revoke.add_argument("key_id", type=int, metavar="ID")
    for sub in (create, listing, revoke):
        add_database_option(sub)
        sub.set_defaults(handler=run)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, extra: list[str], parser: argparse.ArgumentParser) -> int:
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    from service.auth.tokens import issue
    from service.db import keys as keys_repo
    from service.db.repositories import session_scope

    with open_database(args.database_url) as db, session_scope(db.sessions) as session:
        if args.action == "create":
            scopes = args.scopes or ["tune"]
            issued = issue()
            key = keys_repo.create_key(session, name=args.name, scopes=scopes, issued=issued)
            print(f"key {key.id} '{key.name}' ({', '.join(key.scopes)}); its secret, shown "
                  "only now:", file=sys.stderr)
            print(issued.token)
            return 0
        if args.action == "revoke":
            key = keys_repo.revoke_key(session, key_id=args.key_id)
            if key is None:
                print(f"pipetune keys: no key {args.key_id}", file=sys.stderr)
                return 1
            print(f"key {key.id} '{key.name}' revoked")
            return 0
        rows = [{"id": k.id, "name": k.name, "prefix": f"ptk_{k.prefix}", "scopes": k.scopes,
                 "created_at": k.created_at.isoformat(),
                 "revoked_at": k.revoked_at.isoformat() if k.revoked_at else None}
                for k in keys_repo.list_keys(session)]
    if args.json:
        print(json.dumps(rows, indent=2))
    elif not rows:
        print("no keys (pipetune keys create NAME makes one)")
    for row in [] if args.json else rows:
        state = "revoked" if row["revoked_at"] else "active"
        print(f"{row['id']:>4}  {row['name']:<24} {row['prefix']:<17} "
              f"{','.join(row['scopes']):<16} {state}")
    return 0
