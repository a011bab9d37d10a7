"""ARPA: the back-off form of an n-gram model and its exact ARPA export."""
