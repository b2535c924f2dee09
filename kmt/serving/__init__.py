"""`kmt-serve`: an HTTP server for a kmt export (TensorFlow Serving's REST API, dynamic batching, limits, metrics).

model.py loads the export behind one small interface, batching.py gathers concurrent requests into batches,
protocol.py reads and writes the request and response bodies, metrics.py counts, app.py holds the routes.
"""
