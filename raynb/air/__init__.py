"""Ray AIR's older module paths (``ray.air``), re-exporting raynb's names."""
