"""Reading authored project files: the strict YAML reader and the project-file readers."""
