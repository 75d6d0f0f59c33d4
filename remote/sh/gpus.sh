# GPUs as nvidia-smi reports them, one CSV line each; NO-NVIDIA-SMI where there is none.
command -v nvidia-smi >/dev/null 2>&1 || { echo NO-NVIDIA-SMI; exit 0; }
nvidia-smi --query-gpu=index,name,driver_version,memory.used,memory.total --format=csv,noheader,nounits
