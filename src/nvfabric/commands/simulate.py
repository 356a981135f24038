"""``nvfabric simulate``: build a simulated node tree from a profile or a node spec."""

from __future__ import annotations

import os

import click

from ..errors import usage_error
from ..output import guarded, json_option, print_json


@click.command()
@click.argument("profile", required=False)
@click.argument("directory", required=False)
@click.option("--spec", "spec_file", type=click.Path(dir_okay=False),
              help="Node spec YAML (format: ../shared/cases/README.md).")
@click.option("--list", "list_profiles", is_flag=True, help="List the built-in profiles.")
@json_option
@guarded
def simulate(profile: str | None, directory: str | None, spec_file: str | None,
             list_profiles: bool, as_json: bool) -> None:
    """Build a node tree: `simulate PROFILE DIR` or `simulate --spec FILE DIR`."""
    from ..simulate import PROFILES, SpecError, build, parse, profile_spec

    if list_profiles:
        if as_json:
            print_json({"profiles": sorted(PROFILES)})
        else:
            click.echo("\n".join(sorted(PROFILES)))
        return
    if spec_file:
        if directory is not None:
            raise usage_error("give either --spec FILE DIR or PROFILE DIR")
        directory, profile = profile, None
    if not directory:
        raise usage_error("missing DIR", "nvfabric simulate PROFILE DIR, or --spec FILE DIR")
    try:
        if spec_file:
            import yaml

            try:
                with open(spec_file, encoding="utf-8") as fh:
                    raw = yaml.safe_load(fh)
            except (OSError, yaml.YAMLError) as err:
                msg = f"cannot read node spec {spec_file}: {err}".splitlines()[0]
                raise usage_error(msg) from None
            if isinstance(raw, dict) and "node" in raw and "id" in raw:
                raw = raw["node"]  # a field case file: take its node
            spec = parse(raw)
            source = spec_file
        else:
            assert profile is not None
            spec = profile_spec(profile)
            source = profile
    except (SpecError, KeyError) as err:
        raise usage_error(str(err).strip("'\"")) from None
    build(spec, directory)
    from ..simulate.fakes import install

    fakes = install(directory)
    if as_json:
        print_json({"root": directory, "source": source, "fakes": fakes})
    else:
        click.echo(f"simulated node ({source}) written to {directory}")
        click.echo(f"fake daemons and tools in {directory}/bin "
                   f"({', '.join(os.path.basename(f) for f in fakes)})")
