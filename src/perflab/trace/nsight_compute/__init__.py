"""The parts of the Nsight Compute reader: the report's model, rule results, coverage and the ncu tool itself."""
