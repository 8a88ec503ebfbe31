"""The paired comparison: two builds measured side by side in worker pairs, judged case by case."""
