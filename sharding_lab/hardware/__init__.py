"""The hardware: the chips' published figures (:mod:`.chips`), the compile targets — TPU slices and GPU nodes
a step is compiled for without the chips (:mod:`.targets`) — and the devices this process runs on, simulated
host devices or real accelerators (:mod:`.devices`)."""
