"""Server-side SVG diagrams for the admin: the layered DAG layout and its geometry checks."""
