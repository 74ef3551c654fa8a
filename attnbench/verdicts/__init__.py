"""What attnbench concludes from its records: chance and floor levels, whether a model learned
its task, the evidence rules, and the verdict on each published claim (C1-C7).

It reads the record table (attnbench/report/frame.py loads the run directories into it) and
nothing that runs: no model, trainer, experiment or benchmark is imported here, and the chance
levels come from the task generator's own arithmetic (numpy: attnbench.tasks' generate,
policies, levels, vocab and stage modules). attnbench/report renders what it returns.

    records.py       the record-table helpers every judge shares
    quality.py       accuracy intervals, chance and floor, training lengths, learned, effective lengths
    rules.py         verdict names, the learned gate, comparisons of 95% intervals
    claims.py        the claims C1-C3, C6 and every judge (``judge_all``); verdicts/claims/c4_c5_cost.py (C4, C5),
                     verdicts/claims/c7_serving.py (C7)
"""
