"""Flamegraphs: a case's hot loop under py-spy, its collapsed stacks, the SVGs this tool draws, screenshots of them."""
