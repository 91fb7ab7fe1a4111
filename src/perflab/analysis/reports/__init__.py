"""Comparisons and tables built on the analyses: before/after, regression gates, promises, stats, SQL views, HTA breakdowns."""
