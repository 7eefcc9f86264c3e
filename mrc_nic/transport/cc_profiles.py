"""CC profiles of one host's NIC (OCP mrc_ctl.h, mrc_ctl_modify/query_cc_profile):
the object and the table's operations on it (CcTable, a part of
transport.profiles.ProfileTable). The algorithm is UET's NSCC, by its OCP
name; profiles 0..2 are mrc-nic's built-in ones (transport.nscc.PROFILES)."""

from __future__ import annotations

import dataclasses
import errno

from mrc_nic.contract.enums import ProfileState
from mrc_nic.transport import nscc
from mrc_nic.transport import profilebase as base

CC_MAX_PROFILES = 64
NSCC_ALGORITHM = "uet-1.0-nscc"  # the OCP name (mrc_ctl_device_attr.cc.algorithms)
ALGORITHMS = (NSCC_ALGORITHM,)


@dataclasses.dataclass
class CcProfile:
    """struct mrc_ctl_cc_profile_attr (algorithm None: no CC, a fixed window)."""

    id: int
    state: ProfileState = ProfileState.INIT
    algorithm: str | None = None
    config: nscc.NsccConfig | None = None
    builtin: str | None = None  # mrc-nic's profiles 0..2: their name
    has_algorithm: bool = True
    has_config: bool = True

    def __post_init__(self) -> None:
        if self.builtin is None and self.state == ProfileState.INIT:
            self.has_algorithm = self.has_config = False

    def as_dict(self) -> dict:
        return {
            "id": self.id,
            "state": self.state.name,
            "name": self.builtin,
            "algorithm": self.algorithm,
            "cc_config": dataclasses.asdict(self.config) if self.config else None,
        }


class CcTable:
    """ProfileTable's CC profile operations. The table holds cc and cc_users."""

    cc: dict[int, CcProfile]
    cc_users: dict[int, set[int]]

    def cc_profile(self, pid: int) -> CcProfile:
        p = self.cc.get(pid)
        if p is None:
            have = ", ".join(f"{q.id}" for q in self.cc.values())
            raise base.ProfileError(
                errno.ENOENT,
                f"no CC profile {pid} (profiles: {have}); create one with `mrc-nic cc profile set`",
            )
        return p

    def nscc_config(self, pid: int) -> nscc.NsccConfig | None:
        """What a QP on CC profile `pid` runs: NSCC's fields, None for no CC (a
        fixed window). EINVAL unless the profile is ONLINE."""
        p = self.cc_profile(pid)
        if p.state != ProfileState.ONLINE:
            raise base.einval(f"CC profile {pid} is {p.state.name}: a QP takes an ONLINE profile")
        return p.config

    def modify_cc(self, pid: int, attrs: dict) -> CcProfile:
        """mrc_ctl_modify_cc_profile: profile_state, algorithm, cc_config
        (struct mrc_ctl_cc_nscc_cfg's fields; those left out take NSCC's defaults)."""
        base.uint("cc_profile_id", pid, 0, 2**32 - 1)
        base.known(attrs, {"profile_state", "algorithm", "cc_config"}, "CC profile")
        old = self.cc.get(pid)
        if old is not None and old.builtin:
            raise base.einval(
                f"CC profile {pid} ({old.builtin}) is built in; create your own with another id "
                "(3 and up)"
            )
        if old is None:
            base.check_room("CC profiles", len(self.cc), CC_MAX_PROFILES)
            old = CcProfile(pid)
        p = dataclasses.replace(old)
        if old.state == ProfileState.ONLINE and set(attrs) - {"profile_state"}:
            raise base.ProfileError(
                errno.EBUSY, f"CC profile {pid} is ONLINE: set it OFFLINE to change it"
            )
        if "algorithm" in attrs:
            alg = attrs["algorithm"]
            if alg is not None and alg not in ALGORITHMS:
                raise base.einval(
                    f"algorithm must be one of {', '.join(ALGORITHMS)} or null (no CC), not {alg!r}"
                )
            p.algorithm, p.has_algorithm = alg, True
        if "cc_config" in attrs:
            cfg = attrs["cc_config"]
            if p.algorithm is None and cfg:
                raise base.einval(
                    "cc_config needs algorithm uet-1.0-nscc (null: no CC has no fields)"
                )
            try:
                p.config = nscc.NsccConfig().with_overrides(cfg or {}) if p.algorithm else None
                if p.config is not None:
                    p.config.check()
            except (TypeError, ValueError) as e:
                raise base.einval(str(e)) from None
            p.has_config = True
        if "profile_state" in attrs:
            target = base.enum_value(ProfileState, "profile_state", attrs["profile_state"])
            name = f"CC profile {pid}"
            base.check_step(name, old.state, target)
            if old.state == ProfileState.ONLINE and self.cc_users.get(pid):
                qps = ", ".join(f"{q:#x}" for q in sorted(self.cc_users[pid]))
                raise base.ProfileError(
                    errno.EBUSY, f"{name} is used by QP(s) {qps}: destroy them first"
                )
            if (
                target == ProfileState.OFFLINE
                and old.state == ProfileState.INIT
                and not p.has_algorithm
            ):
                raise base.einval(f"{name}: INIT -> OFFLINE needs algorithm")
            if target == ProfileState.ONLINE and not p.has_config:
                raise base.einval(f"{name}: OFFLINE -> ONLINE needs cc_config")
            p.state = target
            if target == ProfileState.INIT:
                self.cc.pop(pid, None)
                return p
        self.cc[pid] = p
        return p
