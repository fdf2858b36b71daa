"""Every config file composes and validates; bad values fail early with the key named."""

from __future__ import annotations

import pytest
from conftest import CONF, ROOT, compose
from hydra.errors import ConfigCompositionException, HydraException
from omegaconf.errors import OmegaConfBaseException

from scaleformer.errors import ConfigError
from scaleformer.methods import REGISTRY
from scaleformer.model.backbone import prepare
from scaleformer.runs.context import to_config

GROUPS = ["backbone", "data", "method", "trainer", "optim", "logger", "callbacks", "paths", "debug"]
# Options that need a user value to compose (e.g. the path of their own file).
NEEDS = {("data", "local"): ["data.path=some/file.jsonl"]}


def _options(group: str) -> list[str]:
    """A group's options: every file of its folder (shared bases sit beside the groups, conf/_data_*.yaml)."""
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


@pytest.mark.parametrize(("group", "option"), [(g, o) for g in GROUPS for o in _options(g)])
def test_every_group_option_composes_and_validates(group, option):
    cfg = compose([f"{group}={option}", *NEEDS.get((group, option), [])])
    rc = to_config(cfg)
    assert rc.choices[group] == option, "the run records which option it was composed from"
    if group == "method":
        assert rc.method.name in REGISTRY


@pytest.mark.parametrize("experiment", sorted(p.stem for p in (CONF / "experiment").glob("*.yaml")))
def test_every_experiment_composes_and_validates(experiment):
    first = (CONF / "experiment" / f"{experiment}.yaml").read_text().splitlines()[0]
    assert first.startswith("# "), "each experiment starts with a comment showing its command"
    rc = to_config(compose([f"experiment={experiment}"]))
    assert rc.method.name in REGISTRY


def test_every_config_file_starts_with_its_command():  # noqa: D103
    for path in CONF.rglob("*.yaml"):
        assert path.read_text().startswith("#"), f"{path} lacks its command comment"


@pytest.mark.parametrize("method", sorted(p.stem for p in (CONF / "method").glob("*.yaml")))
@pytest.mark.parametrize("backbone", ["tiny_bart", "tiny_t5"])
def test_every_method_accepts_the_tiny_backbones(method, backbone):
    rc = to_config(compose([f"method={method}", f"backbone={backbone}"]))
    ready = prepare(rc.backbone, rc.method)
    assert ready.spec.max_positions == 1024 and ready.method is not None


def test_unknown_group_option_is_rejected():
    with pytest.raises((ConfigCompositionException, HydraException), match="method"):
        compose(["method=no_such_method"])


def test_an_unknown_option_is_one_line_listing_the_options_a_user_can_choose():
    """The command's line lists the group's options, not the structured-config bases registered beside them
    (``sled_schema``, the defaults SledConfig holds, which every ``sled*.yaml`` starts from, sits beside the groups)."""
    from scaleformer.cli.train import composition_error

    with pytest.raises((ConfigCompositionException, HydraException)) as e:
        compose(["method=no_such_method"])
    line = composition_error(e.value)
    assert "Could not find 'method/no_such_method'" in line and "\n" not in line
    options = line.split("Available options in 'method': ", 1)[1].split(", ")
    assert {"sled", "truncation", "scaleformer_middle"} <= set(options)
    assert not [o for o in options if o.endswith("_schema")]


def test_typo_key_is_rejected_naming_the_key():
    with pytest.raises((ConfigError, ConfigCompositionException, HydraException, OmegaConfBaseException),
                       match="max_inputtokens"):
        compose(["data.max_inputtokens=3"])


def test_wrong_type_is_rejected_naming_the_key():
    with pytest.raises((ConfigError, ConfigCompositionException, HydraException, OmegaConfBaseException),
                       match="max_target_tokens"):
        compose(["data.max_target_tokens=many"])


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("data.max_target_tokens=0", "data.max_target_tokens"),
        ("data.max_input_tokens=-5", "data.max_input_tokens"),
        ("data.batch_size=0", "data.batch_size"),
        ("generation.num_beams=0", "generation.num_beams"),
        ("generation.min_new_tokens=999", "generation.min_new_tokens"),
        ("trainer.max_steps=0", "trainer.max_steps"),
        ("optim.lr=-1", "optim.lr"),
        ("trainer.checkpoint_every_n_steps=0", "trainer.checkpoint_every_n_steps"),
        ("+trainer.no_such_argument=1", "trainer.no_such_argument"),
        ("+logger.mine.save_dir=x", "logger.mine"),
        ("+callbacks.mine.every=1", "callbacks.mine"),
        ("run_name=../../tmp/x", "run_name"),
        ("data.name=a/b", "data.name"),
        ("backbone.compile_encoder=fast", "backbone.compile_encoder"),
        ("backbone.compile_decoder=os.system", "backbone.compile_decoder"),
    ],
)
def test_out_of_range_values_name_the_key(override, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        to_config(compose([override]))


def test_trainer_passes_unnamed_lightning_arguments_through():
    rc = to_config(compose(["trainer=paper", "trainer.strategy=ddp", "trainer.num_nodes=2",
                            "+trainer.deterministic=true"]))
    assert rc.trainer.extra == {"strategy": "ddp", "num_nodes": 2, "deterministic": True}
    assert (rc.trainer.max_steps, rc.trainer.max_epochs) == (-1, 10)  # the budget in epochs (data.epochs)


def test_scaleformer_middle_inherits_scaleformer():
    base = to_config(compose(["method=scaleformer"])).raw.method
    middle = to_config(compose(["method=scaleformer_middle"])).raw.method
    assert {k for k in base if base[k] != middle[k]} == {"middle_tokens"}


def test_data_options_inherit_the_shared_defaults():
    """Every data option reaches conf/_data_defaults.yaml (or _data_scrolls.yaml, which does) through its defaults
    chain; the shared files sit beside the groups, so they are no data options."""
    import yaml

    def chain(option: str) -> list[str]:
        rel = option[1:].removesuffix("@_here_") if option.startswith("/") else f"data/{option}"
        spec = yaml.safe_load((CONF / f"{rel}.yaml").read_text())
        parents = [d for d in spec.get("defaults", []) if isinstance(d, str) and d != "_self_"]
        return [p for parent in parents for p in (parent, *chain(parent))]

    for option in _options("data"):
        assert "/_data_defaults@_here_" in chain(option), option


def test_runs_are_named_by_the_method_option():
    rc = to_config(compose(["method=scaleformer_middle"]))
    assert rc.method_option == "scaleformer_middle" and rc.method.name == "scaleformer"
    assert "-scaleformer_middle-" in rc.paths.run_id
    assert rc.paths.run_dir.endswith(rc.paths.run_id)
    assert rc.logger["csv"]["save_dir"] == rc.paths.run_dir, "loggers write inside the run folder"


def test_training_length_and_evaluation_settings_keep_the_run_folder():
    from scaleformer.runs.context import RunContext

    def eval_dir(rc, step):
        return RunContext.create(rc).eval_dir(step)

    a = to_config(compose([]))
    b = to_config(compose(["trainer.max_steps=5000", "generation.num_beams=1", "metrics.bertscore.enabled=false",
                           "method.encoder_batch_size=4"]))
    c = to_config(compose(["optim.lr=1e-3"]))
    assert a.paths.run_id == b.paths.run_id != c.paths.run_id
    assert eval_dir(a, 10) != eval_dir(b, 10)


def test_validation_takes_one_of_its_modes_with_one_line_naming_the_value_and_the_allowed_ones():
    with pytest.raises(ConfigError) as e:
        to_config(compose(["trainer.validation=beam"]))
    assert str(e.value) == ("trainer.validation='beam': must be one of paper, greedy, loss "
                            "(paper: the paper's protocol)")
    with pytest.raises(ConfigError, match=r"^trainer\.validation_max_new_tokens=0: must be > 0$"):
        to_config(compose(["trainer.validation=greedy", "++trainer.validation_max_new_tokens=0"]))
    assert to_config(compose(["trainer=paper"])).trainer.validation == "paper"  # the paper's protocol by default


def test_validation_that_is_not_the_papers_joins_the_training_identity():
    """The paper's protocol stays out of the run's name (earlier runs keep theirs); loss and greedy change what
    validation measures, and greedy's cap counts only where greedy reads it."""
    paper = to_config(compose([]))
    assert "validation" not in paper.training_identity["trainer"]
    assert "validation_max_new_tokens" not in paper.training_identity["trainer"]
    loss = to_config(compose(["trainer.validation=loss", "++trainer.validation_max_new_tokens=7"]))
    assert loss.paths.run_id == to_config(compose(["trainer.validation=loss"])).paths.run_id != paper.paths.run_id
    greedy = [to_config(compose(["trainer.validation=greedy", f"++trainer.validation_max_new_tokens={n}"]))
              for n in (16, 32)]
    assert len({paper.paths.run_id, loss.paths.run_id, *(g.paths.run_id for g in greedy)}) == 4


def test_unknown_method_key_is_rejected():
    with pytest.raises(ConfigError, match="method.no_such_key"):
        to_config(compose(["method=truncation", "+method.no_such_key=1"]))


def test_truncation_window_beyond_max_positions_is_rejected():
    rc = to_config(compose(["method=truncation", "method.max_tokens=4096"]))
    with pytest.raises(ConfigError, match=r"method\.max_tokens=4096.*1024"):
        prepare(rc.backbone, rc.method)


def test_hub_backbone_offline_fails_fast_with_a_clear_message(monkeypatch, network_attempts):
    from scaleformer.model.backbone import load_tokenizer
    from scaleformer.model.hub import HubUnreachableError

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    rc = to_config(compose(["backbone=bart_base"]))
    with pytest.raises(HubUnreachableError, match=r"'facebook/bart-base'.*backbone\.pretrained=DIR"):
        load_tokenizer(rc.backbone)
    assert not network_attempts, "offline, nothing may try the network (a library would retry for ~25 s)"


def test_a_bad_logger_argument_fails_before_the_model_is_built(tmp_path):
    from scaleformer.runs.trainer import instantiate_all

    rc = to_config(compose([f"paths.root={tmp_path}", "+logger.csv.no_such_argument=1"]))
    with pytest.raises(ConfigError, match=r"logger\.csv .*no_such_argument"):
        instantiate_all(rc.logger, "logger")


def test_a_users_config_dir_joins_the_search_path(tmp_path):
    """`train.py --config-dir DIR` (and `scaleformer train --config-dir DIR`) adds the user's own group options."""
    import subprocess
    import sys

    from conftest import ROOT

    (tmp_path / "method").mkdir()
    (tmp_path / "method" / "my_sled.yaml").write_text("defaults:\n  - sled\n  - _self_\noverlap: 64\n")
    proc = subprocess.run([sys.executable, "train.py", "--config-dir", str(tmp_path), "method=my_sled", "--cfg",
                           "job"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "overlap: 64" in proc.stdout and "name: sled" in proc.stdout


def test_settings_added_later_keep_earlier_run_names_until_set():
    """A run folder's name is its training identity: a setting added to the schema after runs existed
    stays out of it at its default (those runs keep resuming), and joins it once set."""
    from scaleformer.compose import compose_config
    from scaleformer.runs.identity import ADDED_LATER, training_identity

    rc = to_config(compose_config(["data=govreport", "method=sled"]))  # the shipped defaults, as a user runs
    ident = training_identity(rc)
    for group, defaults in ADDED_LATER.items():
        assert not set(defaults) & set(ident[group]), group
    # the name this configuration had before backbone.config_file and data.synthetic_split_seeds existed
    assert rc.paths.run_id == "govreport-sled-tiny_bart_reader-217d54c748"
    seeded = to_config(compose_config(["data=ledgers_short", "method=sled"]))  # sets a held-out test seed
    assert training_identity(seeded)["data"]["synthetic_split_seeds"] == {"test": 20261126}


@pytest.mark.parametrize(("option", "sizes"), [
    ("bart_base_shape", {"d_model": 768, "encoder_layers": 6, "decoder_layers": 6, "encoder_ffn_dim": 3072,
                         "vocab_size": 50265, "max_position_embeddings": 1024}),
    ("t5_base_shape", {"d_model": 768, "num_layers": 12, "num_decoder_layers": 12, "d_ff": 3072, "vocab_size": 32128}),
])
def test_the_papers_backbones_as_shapes_need_no_hub(option, sizes):
    """backbone.config_file builds the published architecture offline (random weights, offline tokenizer),
    keeping its vocabulary size; the tokenizer's own special ids are the ones the model uses."""
    from scaleformer.model.backbone import load_tokenizer, model_config

    rc = to_config(compose([f"backbone={option}"]))
    tok = load_tokenizer(rc.backbone)
    conf = model_config(rc.backbone, tok)
    assert {k: getattr(conf, k) for k in sizes} == sizes
    assert conf.pad_token_id == tok.pad_token_id and conf.eos_token_id == tok.eos_token_id


def test_a_config_file_is_for_random_weights_and_must_be_readable(tmp_path):
    from scaleformer.model.backbone import load_tokenizer, model_config

    with pytest.raises(ConfigError, match=r"^backbone\.config_file='bart-base-config\.json': builds random weights"):
        to_config(compose(["backbone=bart_base_shape", "backbone.pretrained=facebook/bart-base"]))
    (tmp_path / "c.json").write_text("[1, 2]")
    for path, message in ((tmp_path / "none.json", "not a readable config.json"),
                          (tmp_path / "c.json", "a config.json is a JSON object")):
        rc = to_config(compose(["backbone=bart_base_shape", f"backbone.config_file={path}"]))
        with pytest.raises(ConfigError, match=rf"^backbone\.config_file='.*': {message}"):
            model_config(rc.backbone, load_tokenizer(rc.backbone))


COUNTED_RUN = """
import collections, json, sys
from scaleformer.runs import context, identity
calls = collections.Counter()
def counted(module, name, key=None):
    real = getattr(module, name)
    def wrapper(*a, **k):
        calls[name if key is None else f"{name}:{key(*a)}"] += 1
        return real(*a, **k)
    setattr(module, name, wrapper)
for module, name in ((context, "check_groups"), (identity, "fill_run_paths"), (identity, "training_identity"),
                     (identity, "evaluation_identity")):
    counted(module, name)
counted(context, "check_path_length", key=lambda k, _: k)
from scaleformer.cli.train import main
sys.argv = ["train.py", "debug=default", f"paths.root={sys.argv[1]}/r", f"paths.cache={sys.argv[1]}/c"]
try:
    main()
finally:
    print("CALLS " + json.dumps(calls))
"""


def test_a_run_checks_and_names_itself_once(tmp_path):
    """`train.py` checks the groups once (the command's check is handed to the run), and computes the
    identities, the run paths and each path-length check once."""
    import json
    import os
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", COUNTED_RUN, str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                         timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    line = next((x for x in out.stdout.splitlines() if x.startswith("CALLS ")), None)
    assert out.returncode == 0 and line, out.stderr[-2000:]
    assert json.loads(line[6:]) == {
        "check_groups": 1, "fill_run_paths": 1, "training_identity": 1, "evaluation_identity": 1,
        "check_path_length:paths.root": 1, "check_path_length:paths.cache": 1, "check_path_length:paths.run_dir": 1}


@pytest.mark.parametrize(("override", "line"), [
    ("method.overlap=2000", r"^method\.overlap=2000: must be < method\.chunk_size \(1024\)$"),
    ("method.chunk_size=-1", r"^method\.chunk_size=-1: must be > 0$"),
    ("+method.no_such_key=1", r"^method\.no_such_key: "),
])
def test_the_commands_early_check_covers_the_methods_own_keys(override, line):
    """``check_groups`` is what `train.py` runs before importing Lightning, the data and the model: a
    method's key or range is refused there, in the seconds composing takes, not after the heavy imports."""
    from scaleformer.runs.context import check_groups

    with pytest.raises(ConfigError, match=line):
        check_groups(compose(["method=sled", override]))


def test_the_packages_config_tree_has_no_broken_link():
    """A committed link that points nowhere (scaleformer/conf/conf -> scaleformer/conf, relative to its own folder,
    was one) breaks a wheel build and Hydra's search of the folder; the checkout's conf/ and experiments/ links
    resolve to the package's folders."""
    from conftest import ROOT

    broken = [str(p.relative_to(ROOT)) for base in ("scaleformer/conf", "scaleformer/experiments", "scaleformer/assets")
              for p in (ROOT / base).rglob("*") if p.is_symlink() and not p.exists()]
    assert not broken, broken
    for link in ("conf", "experiments"):
        assert (ROOT / link).resolve() == (ROOT / "scaleformer" / link).resolve()
