"""Hardware: devices, links, instances and clusters, from the shipped catalog."""

from traincast.hardware.catalog import Catalog, efficiency_table, get_catalog
from traincast.hardware.records import GIB, Cluster, Device, Instance, Link

__all__ = ["Catalog", "Cluster", "Device", "GIB", "Instance", "Link", "efficiency_table", "get_catalog"]
