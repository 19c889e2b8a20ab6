-- ResumePartition: $1 partition.
DELETE FROM {pause_part} WHERE partition = $1
