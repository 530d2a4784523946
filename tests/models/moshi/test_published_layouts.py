"""Checkpoints in the layouts Kyutai and NVIDIA publish (`kyutai/moshiko-pytorch-bf16`,
`nvidia/personaplex-7b-v1`: their file names, no `config.json`) load as their own servers load them: with
moshi's built-in 7B configuration (`dep_q=16` for PersonaPlex, as NVIDIA's loader), or with a
configuration file given beside them as `moshi.server --config-path` takes one (`config=` here), which is
how the tiny ones in these tests load."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("moshi")

from moshi.models import loaders

from duplexkit.models import load_model
from duplexkit.models.moshi.checkpoint import CheckpointError, resolve
from duplexkit.models.moshi.plugin import MoshiModel
from duplexkit.models.moshi.tiny import write_published_layout


@pytest.mark.parametrize("family", ["moshiko", "personaplex"])
def test_a_published_layout_loads_as_its_own_server_loads_it(family: str, tmp_path: Path) -> None:
    folder = tmp_path / ("personaplex-7b-v1" if family == "personaplex" else "moshiko-pytorch-bf16")
    config = write_published_layout(folder, family)
    assert not (folder / "config.json").exists()
    assert {loaders.MOSHI_NAME, loaders.MIMI_NAME, loaders.TEXT_TOKENIZER_NAME} <= {
        p.name for p in folder.iterdir()
    }
    # No configuration: moshi's built-in 7B one, PersonaPlex's with the depformer predicting 16 codebooks.
    builtin = resolve(str(folder))
    expected = dict(loaders._lm_kwargs, dep_q=16 if family == "personaplex" else 8)
    assert builtin.builtin and builtin.lm_config == expected and builtin.lm_gen_config == {}
    if family == "moshiko":  # (once: building the published Mimi to find it does not fit costs seconds)
        # The tiny weights are not the 7B model's: loading them so is refused, naming the way out.
        with pytest.raises(ValueError, match=r"built-in 7B configuration.*config=PATH"):
            load_model("moshi", {"checkpoint": str(folder)})
    # With its configuration given, it serves (greedy, from the tiny configuration's lm_gen_config).
    plugin = load_model("moshi", {"checkpoint": str(folder), "config": str(config), "slots": "1"})
    assert isinstance(plugin, MoshiModel)
    assert plugin._batch.lm.dep_q == (16 if family == "personaplex" else 4)
    assert (plugin.gen_defaults.temp, plugin.gen_defaults.temp_text) == (0.0, 0.0)


def test_a_configless_folder_missing_a_file_says_which_and_why(tmp_path: Path) -> None:
    folder = tmp_path / "moshiko"
    write_published_layout(folder, "moshiko")
    (folder / loaders.TEXT_TOKENIZER_NAME).unlink()
    with pytest.raises(CheckpointError, match=r"no config\.json.*7B.*tokenizer_spm_32k_3\.model"):
        resolve(str(folder))
