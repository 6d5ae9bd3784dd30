"""Starting, keeping and ending rank processes (see ``ppdit.runtime``)."""
