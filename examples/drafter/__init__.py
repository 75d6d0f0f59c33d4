"""A DFlash-like drafter for the remote demo: flex_attention with block masks, one thread per device."""
