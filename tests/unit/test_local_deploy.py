"""Which way the local cloud deploys a template: packaged and translated (SAM), or its
assets published (a template the CDK synthesized)."""

from __future__ import annotations

from pathlib import Path

from fireline.local import deploy


def test_the_sam_template_is_packaged_and_translated_not_published() -> None:
    # GIVEN infra/template.yaml (a file named like no assets manifest but itself)
    # THEN it takes the SAM way
    assert not deploy.is_cloud_assembly_template(deploy.TEMPLATE)


def test_a_synthesized_stack_template_beside_its_assets_manifest_is_published(
    tmp_path: Path,
) -> None:
    # GIVEN a cloud assembly: the stack's template and its assets manifest
    template = tmp_path / "Fireline.template.json"
    template.write_text("{}")
    (tmp_path / "Fireline.assets.json").write_text("{}")

    # THEN it takes the CDK way, its manifest found by the stack's name
    assert deploy.is_cloud_assembly_template(template)
    assert deploy.assets_manifest(template) == tmp_path / "Fireline.assets.json"


def test_a_json_template_without_an_assets_manifest_is_a_sam_template(tmp_path: Path) -> None:
    # GIVEN a template in JSON named as the CDK names one, but no manifest beside it
    template = tmp_path / "Other.template.json"
    template.write_text("{}")

    # THEN it takes the SAM way
    assert not deploy.is_cloud_assembly_template(template)
