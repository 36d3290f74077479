"""The Hugging Face layout: save_pretrained / from_pretrained, seqmix.reference without the
extension, and transformers' Auto classes generating seqmix's text."""
import json
import os
import subprocess
import sys

import pytest
import torch

import seqmix
import seqmix.reference


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    m = seqmix.build("weird-net", "tiny", seed=21).eval()
    path = tmp_path_factory.mktemp("hf") / "wn"
    m.save_pretrained(path)
    return m, path


def test_layout_and_round_trip(saved):
    m, path = saved
    assert sorted(os.listdir(path)) == ["config.json", "model.safetensors"]
    cfg = json.loads((path / "config.json").read_text())
    assert cfg["model_type"] == "seqmix" and cfg["architectures"] == ["SeqmixForCausalLM"]
    assert cfg["hidden_size"] == m.config["model"]["d_model"]
    assert cfg["seqmix"]["config"] == m.config
    back = seqmix.from_pretrained(path)
    x = torch.randint(0, 256, (2, 30))
    torch.testing.assert_close(back(x), m(x), rtol=0, atol=0)
    assert back.config == m.config and not back.training


def test_save_pretrained_never_clobbers(saved, tmp_path):
    m, path = saved
    with pytest.raises(ValueError, match="overwrite=True"):
        m.save_pretrained(path)
    m.save_pretrained(path, overwrite=True)
    run = tmp_path / "run"
    m.save(run)
    with pytest.raises(ValueError, match="training run"):
        m.save_pretrained(run, overwrite=True)
    assert (run / "checkpoint.pt").exists()
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(ValueError, match="not a folder"):
        m.save_pretrained(f)
    home = tmp_path / "home"
    home.mkdir()
    (home / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="notes.txt"):
        m.save_pretrained(home, overwrite=True)
    assert (home / "notes.txt").read_text() == "mine"


def test_bad_folders_are_clear_errors(saved, tmp_path):
    m, path = saved
    with pytest.raises(FileNotFoundError, match="config.json"):
        seqmix.from_pretrained(tmp_path)
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "model.safetensors").write_bytes((path / "model.safetensors").read_bytes())
    cfg = json.loads((path / "config.json").read_text())
    cfg["seqmix"]["config"]["model"]["d_model"] = 48
    (bad / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="hidden_size 64 but its model.d_model is 48"):
        seqmix.from_pretrained(bad)
    cfg["hidden_size"] = 48
    (bad / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="shape"):
        seqmix.from_pretrained(bad)
    with pytest.raises(ValueError, match="shape"):
        seqmix.reference.from_pretrained(bad)
    cfg["seqmix"]["config"]["model"]["d_model"] = -1
    (bad / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="model.d_model"):
        seqmix.from_pretrained(bad)
    (bad / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        seqmix.from_pretrained(bad)
    (bad / "config.json").write_text((path / "config.json").read_text())
    (bad / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{garbage")
    with pytest.raises(ValueError, match="safetensors"):
        seqmix.from_pretrained(bad)


def test_reference_runs_without_the_extension(saved):
    # A fresh interpreter where seqmix._C cannot be imported: seqmix.reference still loads
    # the folder and gives the extension's logits.
    m, path = saved
    x = torch.randint(0, 256, (1, 25), generator=torch.Generator().manual_seed(3))
    expected = m(x)
    code = f"""
import sys, importlib.abc, torch
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "seqmix._C":
            raise ImportError("no extension here")
sys.meta_path.insert(0, Block())
import seqmix.reference as ref
m = ref.from_pretrained({str(path)!r})
x = torch.randint(0, 256, (1, 25), generator=torch.Generator().manual_seed(3))
torch.save(m(x), sys.argv[1])
assert "seqmix._C" not in sys.modules
try:
    import seqmix.nn
except ImportError as e:
    assert "seqmix.reference runs without it" in str(e), e
else:
    raise SystemExit("seqmix.nn imported without its extension")
"""
    out = path.parent / "ref_logits.pt"
    subprocess.run([sys.executable, "-c", code, str(out)], check=True)
    torch.testing.assert_close(torch.load(out), expected, rtol=1e-5, atol=1e-5)


def test_transformers_auto_classes_generate_seqmix_s_text(saved):
    pytest.importorskip("transformers")
    import seqmix.hf  # noqa: F401  (registers the Auto classes)
    from transformers import AutoConfig, AutoModelForCausalLM
    m, path = saved
    assert AutoConfig.from_pretrained(path).model_type == "seqmix"
    hm = AutoModelForCausalLM.from_pretrained(path)
    x = torch.randint(0, 256, (2, 20))
    torch.testing.assert_close(hm(x).logits, m(x), rtol=0, atol=0)
    prompt = "My fellow "
    ids = torch.tensor([list(prompt.encode())])
    greedy = hm.generate(ids, max_new_tokens=40, do_sample=False)
    assert greedy[0, len(prompt):].tolist() == m.generate(list(prompt.encode()), 40,
                                                           temperature=0.0)
    torch.manual_seed(5)
    sampled = hm.generate(ids, max_new_tokens=40, do_sample=True, top_k=0, temperature=0.8)
    assert sampled[0, len(prompt):].tolist() == m.generate(list(prompt.encode()), 40,
                                                            temperature=0.8, seed=5)
    labels = torch.randint(0, 256, (2, 20))
    loss = hm(x, labels=labels).loss
    expected = torch.nn.functional.cross_entropy(m(x)[:, :-1].reshape(-1, 256),
                                                 labels[:, 1:].reshape(-1))
    torch.testing.assert_close(loss, expected)


def test_bfloat16_weights_save_as_float32_and_load_everywhere(tmp_path):
    m = seqmix.build("weird-net", "tiny", seed=2).to(torch.bfloat16)
    m.save_pretrained(tmp_path / "bf")
    back = seqmix.from_pretrained(tmp_path / "bf")
    assert back.tok_emb.weight.dtype == torch.float32
    assert torch.equal(back.tok_emb.weight, m.tok_emb.weight.float())
    assert seqmix.load(tmp_path / "bf").config == m.config  # load() reads the layout too


def test_reference_reader_checks_the_tokenizer_and_dtypes(saved, tmp_path):
    m, path = saved
    bad = tmp_path / "bad"
    bad.mkdir()
    for f in ("config.json", "model.safetensors"):
        (bad / f).write_bytes((path / f).read_bytes())
    (bad / "tokenizer.model").write_bytes(b"stray")
    with pytest.raises(ValueError, match="also holds a tokenizer.model"):
        seqmix.reference.from_pretrained(bad)
    (bad / "tokenizer.model").unlink()
    cfg = json.loads((path / "config.json").read_text())
    cfg["seqmix"]["format"] = True
    (bad / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="format"):
        seqmix.reference.from_pretrained(bad)


def test_transformers_loading_is_strict_and_refuses_left_padding(saved, tmp_path):
    pytest.importorskip("transformers")
    import safetensors.torch
    import seqmix.hf  # noqa: F401
    from transformers import AutoModelForCausalLM
    m, path = saved
    hm = AutoModelForCausalLM.from_pretrained(path)
    ids = torch.randint(0, 256, (2, 8))
    left = torch.ones(2, 8, dtype=torch.long)
    left[1, :3] = 0
    with pytest.raises(ValueError, match="left padding"):
        hm(ids, attention_mask=left)
    right = left.flip(1)
    torch.testing.assert_close(hm(ids, attention_mask=right).logits[1, :5],
                               m(ids[1:, :5])[0], rtol=1e-5, atol=1e-5)
    bad = tmp_path / "partial"
    bad.mkdir()
    (bad / "config.json").write_bytes((path / "config.json").read_bytes())
    state = safetensors.torch.load_file(path / "model.safetensors")
    del state["blocks.0.mixer.w"]
    safetensors.torch.save_file(state, bad / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match="blocks.0.mixer.w"):
        AutoModelForCausalLM.from_pretrained(bad)


def test_overwrite_keeps_the_user_s_files_and_non_finite_weights_are_refused(saved, tmp_path):
    m, path = saved
    out = tmp_path / "card"
    m.save_pretrained(out)
    (out / "README.md").write_text("# my model card\n")
    m.save_pretrained(out, overwrite=True)
    assert (out / "README.md").read_text() == "# my model card\n"
    assert sorted(os.listdir(out)) == ["README.md", "config.json", "model.safetensors"]
    before = (out / "model.safetensors").read_bytes()
    broken = seqmix.build("weird-net", "tiny", seed=21)
    with torch.no_grad():
        broken.tok_emb.weight[0, 0] = float("nan")
    with pytest.raises(ValueError, match="tok_emb.weight holds non-finite"):
        broken.save_pretrained(out, overwrite=True)
    with pytest.raises(ValueError, match="non-finite"):
        broken.save_pretrained(tmp_path / "new")
    assert not (tmp_path / "new").exists()
    assert (out / "model.safetensors").read_bytes() == before


def _crafted(path, tmp_path, name, edit_config=None, edit_state=None):
    import safetensors.torch
    bad = tmp_path / name
    bad.mkdir()
    cfg = json.loads((path / "config.json").read_text())
    if edit_config:
        edit_config(cfg)
    (bad / "config.json").write_text(json.dumps(cfg))
    state = safetensors.torch.load_file(path / "model.safetensors")
    if edit_state:
        edit_state(state)
    safetensors.torch.save_file(state, bad / "model.safetensors", metadata={"format": "pt"})
    return bad


def test_transformers_loader_makes_seqmix_s_checks(saved, tmp_path):
    pytest.importorskip("transformers")
    import seqmix.hf  # noqa: F401
    from transformers import AutoModelForCausalLM
    m, path = saved

    def nan(state):
        state["tok_emb.weight"][1, 2] = float("nan")

    def fmt(cfg):
        cfg["seqmix"]["format"] = 99

    def sentencepiece(cfg):
        cfg["seqmix"]["tokenizer"] = "sentencepiece"

    def unknown(cfg):
        cfg["seqmix"]["config"]["model"]["no_such_key"] = 1

    def lr(cfg):
        cfg["seqmix"]["config"]["train"]["lr"] = -1

    def huge(cfg):
        cfg["seqmix"]["config"]["model"]["n_layers"] = 10 ** 6
        cfg["num_hidden_layers"] = 10 ** 6

    cases = [("nan", None, nan, "non-finite"), ("format", fmt, None, "format"),
             ("spm", sentencepiece, None, "sentencepiece"),
             ("unknown", unknown, None, "no_such_key"), ("lr", lr, None, "train.lr"),
             ("huge", huge, None, "memory|GiB")]
    for name, cfg_edit, state_edit, message in cases:
        bad = _crafted(path, tmp_path, name, cfg_edit, state_edit)
        with pytest.raises(ValueError, match=message) as seqmix_error:
            seqmix.from_pretrained(bad)
        with pytest.raises(ValueError, match=message) as hf_error:
            AutoModelForCausalLM.from_pretrained(bad)
        assert str(hf_error.value) == str(seqmix_error.value), name
