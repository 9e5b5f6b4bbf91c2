"""Python clients for Narwhal's engine contract.

Internal API: everything in this package may change between releases.
"""
