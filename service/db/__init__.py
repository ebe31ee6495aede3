"""Tables (``models``) and the functions that read and write them (``repositories``)."""
