"""docs/metrics.md and the code must agree: every metric, its type and its labels."""

from __future__ import annotations

import re

from cephnode_exporter.collection import Collection

from tests.conftest import REPO, MakeTree, Tree, collect
from tests.fixtures.sysfsgen import load_node
from tests.test_kprofile import kprofile_collection
from tests.test_nvme import ONLY_NVME
from tests.test_nvme_ana import ana_node
from tests.test_osd import osd_collection
from tests.test_osd_releases import release_collection
from tests.test_pgs import pgs_collection

ROW = re.compile(r"^\| `(cephnode_[a-z0-9_]+)` \| (\w+) \|([^|]*)\|", re.M)


def documented() -> dict[str, tuple[str, set[str], set[str]]]:
    """name -> (type, labels always present, labels present only with an option)."""
    text = (REPO / "docs" / "metrics.md").read_text()
    out = {}
    for name, kind, labels in ROW.findall(text):
        required = set(re.findall(r"(?<!\()`(\w+)`", labels))
        optional = set(re.findall(r"\(`(\w+)`\)", labels))
        assert name not in out, f"{name} documented twice"
        out[name] = (kind, required, optional)
    return out


def exported(collections: list[Collection]) -> dict[str, tuple[str, list[set[str]]]]:
    out: dict[str, tuple[str, list[set[str]]]] = {}
    for collection in collections:
        for family in collection.families():
            name = family.name + ("_total" if family.type == "counter" else "")
            kind, labelsets = out.setdefault(name, (family.type, []))
            assert kind == family.type
            # A histogram's `le` is the bucket, not a label of the metric.
            labelsets.extend(set(s.labels) - {"le"} for s in family.samples)
    return out


def every_metric(make_tree: MakeTree) -> list[Collection]:
    """Collections that between them make every collector emit everything it can."""
    variant = load_node("epyc9454p-tuned")
    variant["cpufreq"].update(
        {"driver": "amd-pstate-epp", "governor": "performance", "amd_pstate_status": "active"}
    )
    variant["cpufreq"].pop("boost", None)
    variant["cpufreq"].pop("available_frequencies", None)
    trees: list[Tree] = [make_tree("epyc9454p-detuned"), make_tree(variant)]
    dev = trees[1].rootfs / "dev"
    dev.mkdir(exist_ok=True)
    (dev / "cpu_dma_latency").write_bytes((2_000_000_000).to_bytes(4, "little"))
    collections = [collect(t.flags) for t in trees]
    collections.append(collect([*trees[0].flags, "--collector.cpuidle.per-cpu"]))
    collections.append(collect([*trees[1].flags, "--collector.nvme.temperature"]))
    # intel_pstate's mode and global cap (the reference nodes are AMD): the Xeon node.
    collections.append(collect(make_tree("xeon8480-tuned").flags))
    # Native multipath with ANA (the reference nodes have neither): path states, policies.
    collections.append(collect([*make_tree(ana_node()).flags, *ONLY_NVME]))
    # kprofile is off by default and reports only after a sampling window: a fake perf
    # replays the constructed reference profile (tests/test_kprofile.py).
    collections.append(kprofile_collection(trees[0], trees[0].root))
    # The recorded OSDs (memstore and BlueStore, ops in flight) behind fake admin sockets.
    collections.append(osd_collection(trees[0]))
    # The newer releases' families (Tentacle's recorded OSDs, slow-op counters moved).
    collections.append(release_collection(trees[0], "tentacle"))
    # pgs is off by default: its binding replays the recorded laggy listing.
    collections.append(pgs_collection(trees[0]))
    # A check that cannot judge (cephnode_tuning_check_unknown): a sysctl of the profile
    # that /proc/sys does not show. Last: it changes the tree.
    (trees[1].proc / "sys/net/core/somaxconn").unlink()
    collections.append(collect(trees[1].flags))
    return collections


def test_every_exported_metric_is_documented_and_vice_versa(make_tree: MakeTree) -> None:
    docs = documented()
    code = exported(every_metric(make_tree))
    assert sorted(set(code) - set(docs)) == [], "exported but not in docs/metrics.md"
    assert sorted(set(docs) - set(code)) == [], "documented but never exported"
    for name, (kind, labelsets) in code.items():
        doc_kind, required, optional = docs[name]
        assert kind == doc_kind, f"{name}: type {kind}, documented {doc_kind}"
        for labels in labelsets:
            assert required <= labels, f"{name}: labels {labels} lack {required - labels}"
            assert labels <= required | optional, (
                f"{name}: undocumented {labels - required - optional}"
            )
