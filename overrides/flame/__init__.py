"""Flamegraphs: a case's hot loop under py-spy, its collapsed stacks, and the pictures.

- `hotloop.py`: what `pyspybench.py` runs: one case's hot loop and nothing else; `--record`;
- `watch.py`: `--record`'s watch over the loop py-spy traces (at pace, finished, stuck or dead);
- `pyspy.py`: which py-spy, at what rate;
- `flamegraph.py`: recording a case with py-spy, and its SVG;
- `stacks.py`: collapsed stacks read back, the hot loop cut out;
- `differential.py`: base against branch, function by function, with errors;
- `flamesvg.py`: the SVGs this tool draws (py-spy's, both differentials), laid out once;
- `flamepng.py`: their PNGs, drawn by matplotlib from the same layout, and the PNG checks.
"""
