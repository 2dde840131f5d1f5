"""A training worker for tests/integration/test_distributed.py: trains like scripts/train.py, then saves this
worker's final parameters as DUMP_DIR/params.rank<R>, so a test can compare the workers with each other and with
one process.
With FAIL_ON_SAVE=R in the environment, the worker of kvstore rank R raises at its first checkpoint instead.
With NO_COPY_RANK=R, the worker of kvstore rank R reads its flags in an empty directory, as a worker on a machine
without a copy of the model directory does (it joins the job first: the scheduler ranks the workers).

    python tests/dist_worker.py DUMP_DIR [train flags ...]
"""
import os
import sys
from pathlib import Path

from nmt.cli import build_train_parser, training_run
from nmt.train import create_trainer


def join_first(rank: str, elsewhere: Path) -> None:
    """Join the job now, and read the flags in `elsewhere`, an empty directory, if this worker is of kvstore rank
    `rank`."""
    from nmt import trainer_setup, workers
    kv = workers.create_kvstore("dist_sync")
    trainer_setup.create_kvstore = lambda name: kv   # (the job is joined once)
    if str(kv.rank) == rank:
        elsewhere.mkdir()
        os.chdir(elsewhere)


def main(argv) -> int:
    dump_dir, args = Path(argv[0]), build_train_parser().parse_args(argv[1:])
    if os.environ.get("NO_COPY_RANK"):
        join_first(os.environ["NO_COPY_RANK"], dump_dir / "elsewhere")
    cfg, _, init = training_run(args)
    trainer = create_trainer(cfg, resume=args.resume, overwrite=args.overwrite, init=init)
    if os.environ.get("FAIL_ON_SAVE") == str(trainer.rank):
        def failing_save(is_best=False):
            raise RuntimeError(f"injected failure in worker rank {trainer.rank}")
        trainer.save_checkpoint = failing_save
    trainer.fit()
    trainer.net.save_parameters(str(dump_dir / f"params.rank{trainer.rank}"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
