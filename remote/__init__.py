"""remote: drive PyTorch training inside Proxmox LXC GPU containers over SSH."""

__version__ = "0.1.0"
