"""One pass over a source: the streaming reader (records and events), the compact store of values, the runs as
DataFrames (:class:`frame.RunLog`) and the streamed CSV export."""
