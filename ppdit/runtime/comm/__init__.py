"""How ranks talk: the one mesh of process groups and the one wire (see ``ppdit.runtime``)."""
