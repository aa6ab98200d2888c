"""The public functions on Dask arrays (api), their gradients (grad), the
argument rules (args), the graph pieces (graph) and what runs in a task
(tasks).  Imported only when a call has a Dask array among its arguments."""
