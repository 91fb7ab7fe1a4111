"""The puzzle engine: the puzzle.toml schema (spec), the catalog, the learner's workspace, running a variant
(runner), replaying its recording (replay), the fix check (checker), recording on the GPU machine
(recording) and the learner's progress. It knows evidence and question kinds only through their registries
(perflab.puzzles.evidence, perflab.puzzles.questions), never by name.
"""
