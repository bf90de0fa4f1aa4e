"""One module per CLI subcommand. Each defines `add_parser(subparsers)` and `run(args) -> int`."""

from topology.catalog import load_cluster
from topology.spec import ClusterSpec


def load_capped_cluster(arg: str | dict | ClusterSpec) -> ClusterSpec:
    """A --cluster argument (preset name, JSON path) under the cluster size cap the service
    applies (service.settings.check_cluster_size). Raises: SpecError."""
    from service.settings import check_cluster_size, cli_settings

    cluster = load_cluster(arg)
    check_cluster_size(cluster, cli_settings())
    return cluster
