"""What attnbench concludes from its records: chance and floor levels, whether a model learned
its task, the evidence rules, and the verdict on each published claim (C1-C7).

It reads the record table (attnbench/report/frame.py loads the run directories into it) and
nothing that runs: no model, trainer, experiment or benchmark is imported here, and the chance
levels come from the task generator's own arithmetic (numpy: attnbench.tasks' generate,
policies, levels, vocab and stage modules). attnbench/report renders what it returns.

    readings.py      the record-table helpers every judge shares
    quality.py       accuracy intervals, chance and floor, training lengths, learned, effective lengths
    rules.py         verdict names, the learned gate, comparisons of 95% intervals
    quality_training.py  how each model was trained, read from the records
    scale_fit.py     the width ladder's trend (exp=scale)
    claims/          one module per claim (c1_c2_text01, c3_multihop, c3_scale, c4_c5_cost, c6_capacity,
                     c7_serving) and judge.py: every claim's entry (``CLAIMS``) and ``judge_all``
"""
