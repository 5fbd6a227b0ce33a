"""Graph sources that need no download: R-MAT (Graph500) and the graphs shipped by graphdatascience."""
