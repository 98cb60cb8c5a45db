"""Fine-tuning shared by run_squad.py and run_glue.py: the training core and its options, GLUE data and metrics,
GLUE's leaderboard files, feature batching, and downstream.py's fixed plan.

Imports utils/, checkpoints/, training/ and the root's model, optimizer, scheduler and tokenizer. Imported by the
fine-tuning entry scripts, squad_utils and downstream.py.
"""
