"""Multi-process jobs (``torchrun``-style DDP ranks): the pieces that pause every rank at one
consistent point. See ``shared/design/multiprocess.md`` for the design; :mod:`.ballot` is the
agreement on where to pause, :mod:`.counts` reads how many collectives a rank has issued."""
