"""Several GPUs: collectives, their sizes and bus bandwidth against the interconnect, pipeline stages."""
