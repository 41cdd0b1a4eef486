"""Device profiles: a device and its roofline parameters as ``traincast calibrate`` fitted them.

A profile (YAML under ``$TRAINCAST_HOME/profiles/``) holds the device record, the fitted parameters in the
roofline's YAML form (``overrides``, :meth:`traincast.predict.roofline.RooflineParams.to_table`), the
measurement fingerprint, the date and the fit's residuals. ``traincast predict --profile FILE`` or
``--device local`` forecasts with it (:meth:`DeviceProfile.predictor`); ``traincast calibrate`` makes one
(:mod:`traincast.fit.calibration`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Literal

import yaml

from pydantic import ConfigDict, Field

from traincast import yamlio
from traincast.errors import ConfigError, DataError
from traincast.hardware.records import Device, Link
from traincast.paths import profiles_dir
from traincast.predict.analytical import AnalyticalPredictor
from traincast.predict.base import Predictor
from traincast.predict.rnn import with_cudnn_recurrent
from traincast.predict.roofline import check_table
from traincast.schema import Document, NonNegativeFloat, PositiveFloat, parse


class _Link(Document):
    type: str
    gb_per_s: NonNegativeFloat


class _ProfileDevice(Document):
    """The device of a profile: :class:`~traincast.hardware.records.Device`'s fields."""

    model_config = ConfigDict(extra="forbid", strict=False, frozen=True)  # YAML gives lists for tuples

    name: str
    kind: Literal["gpu", "cpu"]
    vendor: str = ""
    generation: str
    fp32_tflops: PositiveFloat
    tf32_tflops: PositiveFloat | None = None
    fp16_tflops: PositiveFloat | None = None
    bf16_tflops: PositiveFloat | None = None
    memory_bytes: Annotated[int, Field(ge=1)]
    memory_bandwidth_gb_per_s: PositiveFloat
    sm_count: Annotated[int, Field(ge=0)] = 0
    boost_clock_mhz: NonNegativeFloat = 0.0
    link: _Link
    tdp_w: PositiveFloat | None = None
    source: str = ""
    date: str = ""
    aliases: tuple[str, ...] = ()
    note: str = ""
    fp32_matrix_tflops: PositiveFloat | None = None
    base_clock_mhz: PositiveFloat | None = None
    fp32_int32_shared_lanes_per_sm: Annotated[int, Field(ge=0)] = 0
    fp8_tflops: PositiveFloat | None = None
    mxfp8_tflops: PositiveFloat | None = None
    fp4_tflops: PositiveFloat | None = None
    nvlink_domain_gpus: Annotated[int, Field(ge=1)] | None = None


class ProfileFile(Document):
    """The schema of a device profile file."""

    model_config = ConfigDict(extra="forbid", strict=False, frozen=True)

    name: Annotated[str, Field(min_length=1, max_length=200)]
    device: _ProfileDevice
    overrides: dict
    fingerprint: dict = {}
    date: str = ""
    fit: dict = {}


@dataclass(frozen=True)
class DeviceProfile:
    name: str
    device: dict  # Device fields
    overrides: dict  # roofline parameters (YAML form) on top of the catalog's defaults for the device
    fingerprint: dict
    date: str
    fit: dict = field(default_factory=dict)  # residuals, parameters, the measurements used

    def device_record(self) -> Device:
        d = dict(self.device)
        d["link"] = Link(**d["link"])
        d["aliases"] = tuple(d.get("aliases", ()))
        return Device(**d)

    def predictor(self) -> Predictor:
        ov = dict(self.overrides)
        if "op_overhead_us" in ov and "light_overhead_us" not in ov and self.device.get("kind") == "cpu":
            # a profile fitted before the light overhead existed charged every op alike
            ov["light_overhead_us"] = ov["op_overhead_us"]
        return with_cudnn_recurrent(AnalyticalPredictor(overrides=ov, name=f"analytical (profile {self.name})"))

    @property
    def host_only(self) -> bool:
        """Whether this is a ``calibrate --host-only`` profile (the host's two issue costs and nothing else)."""
        return bool((self.fit or {}).get("host_only"))

    def require_host_only(self) -> DeviceProfile:
        if not self.host_only:
            raise ConfigError(f"the profile {self.name!r} was fitted to its own device; only a `calibrate "
                              "--host-only` profile goes with another GPU (--gpu, --instance, plan)")
        return self

    def host_predictor(self, inner: Predictor) -> Predictor:
        """``inner`` issued by this profile's host (a host-only profile used with another catalog GPU)."""
        from traincast.predict.host import WithHost

        self.require_host_only()
        return WithHost(inner, self.overrides["host_forward_us"], self.overrides["host_backward_us"])

    def host_note(self) -> str:
        return (f"the host that issues the kernels: profile {self.name!r} ({self.overrides['host_forward_us']:g} / "
                f"{self.overrides['host_backward_us']:g} us per forward / backward op, measured with "
                f"{self.device.get('name', 'another GPU')})")

    def save(self, path: str | Path | None = None) -> Path:
        path = Path(path) if path else profiles_dir() / f"{self.name}.yaml"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            plain = json.loads(json.dumps(asdict(self), default=str))  # str subclasses, tuples -> plain YAML
            path.write_text(yaml.safe_dump(plain, sort_keys=False))
        except OSError as exc:
            raise ConfigError(f"cannot write the profile to {str(path)!r}: {exc.strerror or exc}") from None
        return path

    @classmethod
    def load(cls, path: str | Path) -> "DeviceProfile":
        """A profile file, validated (:class:`ProfileFile`); SpecError naming the field otherwise."""
        p = Path(path)
        if not p.exists():
            raise DataError(f"device profile {str(p)!r} does not exist; run `traincast calibrate` first")
        if p.is_dir():
            raise DataError(f"device profile {str(p)!r} is a folder; give a profile file from `traincast calibrate`")
        try:
            d = yamlio.safe_load(p.read_text())
        except UnicodeDecodeError:
            raise DataError(f"{p}: not a traincast device profile (not UTF-8 text)") from None
        except yaml.YAMLError as exc:
            raise DataError(f"{p}: not a traincast device profile (not valid YAML: {str(exc).splitlines()[0]})") from None
        if not isinstance(d, dict):
            raise DataError(f"{p}: not a traincast device profile (a profile is a mapping with name, device, overrides)")
        doc = parse(ProfileFile, d, str(p))
        check_table(doc.overrides, f"{p}: overrides")
        return cls(name=doc.name, device=doc.device.model_dump(), overrides=dict(doc.overrides),
                   fingerprint=dict(doc.fingerprint), date=str(doc.date), fit=dict(doc.fit))


def find_profile(name: str = "local") -> DeviceProfile:
    """A profile by file path or by name in the profiles folder."""
    p = Path(name)
    if p.suffix in (".yaml", ".yml") or p.exists():
        return DeviceProfile.load(p)
    cand = profiles_dir() / f"{name}.yaml"
    if not cand.exists():
        raise DataError(f"no device profile {name!r} in {profiles_dir()}; run `traincast calibrate` "
                        "or pass --profile FILE")
    return DeviceProfile.load(cand)


def list_profiles() -> list[DeviceProfile]:
    d = profiles_dir()
    return [DeviceProfile.load(p) for p in sorted(d.glob("*.yaml"))] if d.exists() else []
