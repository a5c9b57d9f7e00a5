"""RecompressJob's field metadata is the one list: every option reaches zopt.recompress and the CLI,
and the options several sources (concat_dim) refuse are refused from it, flag named (issue 37)."""

from __future__ import annotations

import dataclasses
import inspect

import pytest
from click.testing import CliRunner

import zopt
from zopt.cli.commands import main
from zopt.cli.recompress import recompress as recompress_command
from zopt.errors import OptionError
from zopt.job.options import SEVERAL, RecompressJob

OPTIONS = [f for f in dataclasses.fields(RecompressJob) if not f.metadata.get("derived")]
REFUSED_SEVERAL = [f.name for f in OPTIONS if SEVERAL in f.metadata.get("refused", {})]
#: a value of each option that several sources refuse, for the API and the CLI
VALUES = {"lossy": ("sst=abs:0.1", "sst=abs:0.1"), "plan": ("PLAN", "PLAN")}


def test_every_option_is_a_keyword_of_zopt_recompress_and_a_flag_unless_api_only():
    keywords = set(inspect.signature(zopt.recompress).parameters)
    flags = {p.name for p in recompress_command.params}
    assert [f.name for f in OPTIONS if f.name not in keywords] == []
    assert [f.name for f in OPTIONS if f.name not in flags and not f.metadata.get("api_only")] == []
    assert {f.name for f in OPTIONS if f.metadata.get("api_only")} == {"progress", "before_publish"}


def test_the_options_several_sources_refuse_come_from_the_fields():
    assert sorted(REFUSED_SEVERAL) == ["lossy", "plan"]
    assert set(VALUES) == set(REFUSED_SEVERAL)  # a newly refused option gets a case below


def _plan_file(tmp_path) -> str:
    path = tmp_path / "plan"  # a plan is a directory (zopt plan); several sources refuse it before reading it
    path.mkdir(exist_ok=True)
    return str(path)


@pytest.mark.parametrize("name", REFUSED_SEVERAL)
def test_zopt_recompress_refuses_it_with_several_sources_naming_it(tmp_path, name):
    value = VALUES[name][0].replace("PLAN", _plan_file(tmp_path))
    dst = tmp_path / "out.zarr"
    with pytest.raises(OptionError, match=f"^{name}: ") as info:
        zopt.recompress([str(tmp_path / "a.nc"), str(tmp_path / "b.nc")], dst, concat_dim="time", **{name: value})
    assert info.value.option == name
    assert not dst.exists()


@pytest.mark.parametrize("name", REFUSED_SEVERAL)
def test_the_cli_refuses_it_with_several_sources_naming_its_flag(tmp_path, name):
    value = VALUES[name][1].replace("PLAN", _plan_file(tmp_path))
    flag = "--" + name.replace("_", "-")
    dst = tmp_path / "out.zarr"
    result = CliRunner().invoke(main, ["recompress", str(tmp_path / "*.nc"), str(dst), "--concat-dim", "time",
                                       flag, value])
    assert result.exit_code == 2, result.output
    assert flag in result.output and "several sources" in result.output
    assert "Traceback" not in result.output and not dst.exists()


def test_the_command_line_flags_of_the_job_are_built_from_the_fields():
    """Issue 37: an option is its field (with its ``Flag``), its keyword and the module where it acts; the
    ``zopt recompress`` flag follows from the field, so the command is not a fourth file to edit."""
    from zopt.job.options import flagged_options

    params = {p.name: p for p in recompress_command.params}
    flagged = flagged_options()
    assert [name for name, _ in flagged] == [f.name for f in OPTIONS if "flag" in f.metadata]
    assert {f.name for f in OPTIONS if "flag" not in f.metadata} == {"src", "dst", "progress", "before_publish"}
    for name, flag in flagged:
        param = params[name]
        assert param.help == flag.help and param.multiple == flag.multiple, name
        assert "/".join(param.opts + param.secondary_opts) == flag.decls[0], name
    job_flags = [p.name for p in recompress_command.params if p.name in dict(flagged)]
    assert job_flags == [name for name, _ in flagged]  # --help lists them in field order
