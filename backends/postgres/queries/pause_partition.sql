-- PausePartition: $1 partition. Pausing a paused partition keeps its since.
INSERT INTO {pause_part} (partition) VALUES ($1) ON CONFLICT (partition) DO NOTHING
