# Append stdin to file $2 in folder $1 (made if missing).
mkdir -p -- "$1"
cat >> "$1/$2"
