"""How a trace's time is cut into steps and windows, and what the recording itself holds: which runtime call
launched each GPU op (links), records lost, graph captures."""
