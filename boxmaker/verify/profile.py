"""Named model profiles (conf/profiles/<name>.toml): what `make run MODEL=<name>` and
`make verify-device MODEL=<name>` serve, so a profile needs no hand-written config.

A profile names the model file in the cache and the script that fetches it, the llama-server
flags that must agree with loopd's [expect] (alias, template, -c, -np, -t), loopd's config and
brokerd's config and starter grants, and how long `make run` waits for it all to be ready
(`start_s`, default 180 s; boxmaker/verify/ready.py). Paths are relative to the profile file's
folder.

    python -m boxmaker.verify.profile NAME    prints the profile as shell assignments (run.sh)
"""

from __future__ import annotations

import os
import shlex
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PROFILES = REPO / "conf" / "profiles"
DEFAULT = "local"
START_S = 180.0  # make run's readiness wait when a profile says no `start_s`
CACHE = Path(os.environ.get("BOXMAKER_CACHE") or Path.home() / ".cache" / "boxmaker")


class ProfileError(Exception):
    """A profile that does not exist or does not parse: one line naming the file."""


@dataclass(frozen=True, slots=True)
class Profile:
    name: str
    model: Path  # the .gguf in the cache
    fetch: Path  # the script that puts it there (and smoke-tests it); prints its path last
    alias: str
    template: Path
    ctx: int  # llama-server -c: all slots together
    slots: int
    threads: int
    loopd_config: Path
    brokerd_config: Path
    grants: Path
    start_s: float = START_S  # make run's readiness bound: the model loads, loopd's self-test

    def llama_env(self) -> dict[str, str]:
        """conf/programs/llama-server.conf's profile variables (BOXMAKER_MODEL aside)."""
        return {
            "BOXMAKER_ALIAS": self.alias,
            "BOXMAKER_TEMPLATE": str(self.template),
            "BOXMAKER_LLAMA_CTX": str(self.ctx),
            "BOXMAKER_LLAMA_SLOTS": str(self.slots),
            "BOXMAKER_LLAMA_THREADS": str(self.threads),
        }


def names() -> list[str]:
    return sorted(p.stem for p in PROFILES.glob("*.toml"))


def load_profile(name: str) -> Profile:
    """Raises ProfileError naming the file (or the profiles there are)."""
    path = PROFILES / f"{name}.toml"
    if "/" in name or not path.is_file():
        raise ProfileError(f"no model profile {name!r} (the profiles are {', '.join(names())}, "
                           f"in {PROFILES})")  # fmt: skip
    try:
        table = tomllib.loads(path.read_text())
        model, loopd, brokerd = table["model"], table["loopd"], table["brokerd"]
        here = path.parent

        def rel(value: str) -> Path:
            return (here / value).resolve()

        return Profile(
            name=name,
            model=CACHE / "models" / str(model["file"]),
            fetch=rel(model["fetch"]),
            alias=str(model["alias"]),
            template=rel(model["template"]),
            ctx=int(model["ctx"]),
            slots=int(model["slots"]),
            threads=int(model["threads"]),
            loopd_config=rel(loopd["config"]),
            brokerd_config=rel(brokerd["config"]),
            grants=rel(brokerd["grants"]),
            start_s=float(model.get("start_s", START_S)),
        )
    except (OSError, tomllib.TOMLDecodeError, KeyError, TypeError, ValueError) as exc:
        raise ProfileError(f"{path}: {type(exc).__name__}: {exc}") from exc


def main(argv: list[str]) -> int:
    try:
        p = load_profile(argv[0] if argv else DEFAULT)
    except ProfileError as exc:
        print(f"run: {exc}", file=sys.stderr)
        return 2
    shell = {
        "PROFILE_MODEL": str(p.model),
        "PROFILE_FETCH": str(p.fetch),
        "PROFILE_LOOPD_CONFIG": str(p.loopd_config),
        "PROFILE_BROKERD_CONFIG": str(p.brokerd_config),
        "PROFILE_GRANTS": str(p.grants),
        "PROFILE_START_S": f"{p.start_s:g}",
        **p.llama_env(),
    }
    for key, value in shell.items():
        print(f"{key}={shlex.quote(value)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
