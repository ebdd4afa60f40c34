"""Executors of a run, as siblings: `inprocess` (threads of this process) and `dask` (actors on the
workers of a Dask cluster). Each supplies a `PeerFactory` and a `launch`; none imports another.
"""
