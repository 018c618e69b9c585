"""`python -m fp4ops`: the main job (see fp4ops.demo); `python -m fp4ops quantize ...`: the
checkpoint quantizer (see fp4ops.checkpoint)."""

import argparse
import sys

if len(sys.argv) > 1 and sys.argv[1] == "quantize":
    from .checkpoint import main as quantize_main

    quantize_main(sys.argv[2:])
else:
    from .demo import check_arguments, main

    parser = argparse.ArgumentParser(prog="python -m fp4ops", description=__doc__,
                                     epilog="python -m fp4ops quantize --help: the checkpoint quantizer")
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--cols", type=int, default=4096, help="a multiple of 32")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default=None, help="cpu or cuda (default: the best one present)")
    args = parser.parse_args()
    check_arguments(parser, args)
    main(args.rows, args.cols, args.seed, args.device)
