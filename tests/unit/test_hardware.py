"""tuner.engines.hardware: which data types the CPU computes natively, and what a search space
sees."""

from __future__ import annotations

from tuner.engines.hardware import Hardware, isa_flags, template_context

ZEN2 = "fpu vme sse sse2 ssse3 fma sse4_1 avx f16c avx2 bmi2 sha_ni clwb"
ZEN4 = ZEN2 + " avx512f avx512dq avx512_bf16 avx512_vnni"
SAPPHIRE = ZEN4 + " amx_bf16 amx_tile amx_int8"


def hw(flags: str, gpus: list | None = None) -> Hardware:
    return Hardware(
        hostname="h", cpu_model="c", cpu_count=2, memory_gib=24.0,
        cpu_flags=isa_flags(flags), gpus=gpus or [],
    )  # fmt: skip


def test_isa_flags_keep_only_what_decides_the_data_types() -> None:
    assert isa_flags(ZEN2) == ["avx2", "fma"]
    assert "avx512_bf16" in isa_flags(ZEN4) and "sse" not in isa_flags(ZEN4)
    assert isa_flags("") == []


def test_bf16_is_native_with_avx512_bf16_or_amx_and_emulated_on_avx2() -> None:
    assert hw(ZEN2).bf16_native is False
    assert hw(ZEN4).bf16_native is True
    assert hw(SAPPHIRE).bf16_native is True
    assert hw("fp asimd bf16 i8mm").bf16_native is True  # Arm
    assert hw("").bf16_native is None  # no lscpu: unknown, not emulated


def test_only_a_cpu_known_to_emulate_bf16_gets_the_bf16_emulated_template() -> None:
    assert template_context(hw(ZEN2))["bf16_emulated"] == "yes"
    assert template_context(hw(ZEN4))["bf16_emulated"] == ""
    assert template_context(hw(""))["bf16_emulated"] == ""
    gpu = hw(ZEN2, gpus=[{"name": "H200"}])
    assert template_context(gpu)["bf16_emulated"] == ""  # a GPU server computes on the GPU


def test_the_avx512_template_marks_where_an_fp8_kv_cache_can_start() -> None:
    assert template_context(hw(ZEN2))["avx512"] == ""
    assert template_context(hw(ZEN4))["avx512"] == "yes"
    assert template_context(hw(SAPPHIRE))["avx512"] == "yes"
