"""llama-server's deployment-precision variants (engines.adapters.http.llama_variants
:llama_server_f16, llama_server_q8_0) declare what the server runs: the GGUF's weights as
the server reports them (/props `model_ftype`, its log's `file type`), the K and V cache types
and flash attention as its log says them (the same configuration at `-lv 4`).

The declaration tables run everywhere; the servers only where BATCHING_LLAMA_SERVER names the
binary (bash ci/llama-server-env.sh builds it; ci/test-third-party.sh sets it under
ALL_VARIANTS), skipped visibly elsewhere.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

httpx = pytest.importorskip("httpx", reason="httpx (the optional extra `http`) is not installed")

from engines.adapters.http.convert import gguf_model  # noqa: E402
from engines.adapters.http.gguf_convert import OUTTYPES  # noqa: E402
from engines.adapters.http.llama_variants import CACHE_DTYPES, WEIGHT_DTYPES  # noqa: E402
from engines.adapters.http.servers import LLAMA_SERVER  # noqa: E402
from engines.protocol import DTYPES, KV_CACHE_DTYPES, capabilities_of  # noqa: E402

needs_server = pytest.mark.skipif(
    not os.environ.get(LLAMA_SERVER),
    reason=f"{LLAMA_SERVER} does not name a llama-server binary (bash ci/llama-server-env.sh "
           "builds one; ci/test-third-party.sh sets it under ALL_VARIANTS): the F16 and Q8_0 "
           "servers' declarations were not read back")


def test_every_outtype_and_cache_type_has_a_declaration_the_protocol_allows() -> None:
    assert set(WEIGHT_DTYPES) == set(OUTTYPES)
    assert set(WEIGHT_DTYPES.values()) <= set(DTYPES)
    assert set(CACHE_DTYPES.values()) <= set(KV_CACHE_DTYPES)


def test_an_outtype_the_converter_lacks_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="outtype: 'q4_k'"):
        gguf_model("tiny", binary=Path("/nonexistent/llama-server"), outtype="q4_k")


@needs_server
@pytest.mark.parametrize(("factory", "outtype", "ftype", "declared"), [
    ("llama_server_f16", "f16", "F16", ("float16", "float16")),
    ("llama_server_q8_0", "q8_0", "Q8_0", ("int8", "float16")),
])
def test_the_variant_declares_what_the_server_runs(launched: None, factory: str, outtype: str,
                                                   ftype: str,
                                                   declared: tuple[str, str]) -> None:
    from engines.adapters.http import llama_variants

    eng = getattr(llama_variants, factory)()
    caps = capabilities_of(eng)
    assert (caps.dtype, caps.kv_dtype) == declared
    assert httpx.get(eng.url + "/props", timeout=10).json()["model_ftype"] == ftype
    # The server does not report its cache: the same configuration at -lv 4 logs it (the
    # factory leaves the default verbosity, under which those lines are not written).
    verbose = llama_variants.llama_server_deployed(outtype, log_verbosity=4)
    assert (capabilities_of(verbose).dtype, capabilities_of(verbose).kv_dtype) == declared
    assert verbose.log is not None
    log = Path(verbose.log).read_text(errors="replace")
    assert re.search(rf"file type\s*=\s*{ftype}\b", log), "no file type line in the log"
    # The cache the declaration names: "K (f16): ... V (f16): ..." when the cache is made.
    cache = re.search(r"K \((\w+)\):.*V \((\w+)\):", log)
    assert cache is not None, "no KV cache line in the server's log"
    assert {CACHE_DTYPES[cache[1]], CACHE_DTYPES[cache[2]]} == {declared[1]}
    assert "Flash Attention enabled" in log
