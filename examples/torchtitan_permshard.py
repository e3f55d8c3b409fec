"""torchtitan's debug model trained on token files through permshard: a config module.

    PERMSHARD_DATA_PATH="0.3 /data/web 0.7 /data/code" \
    torchrun --nproc_per_node 2 -m torchtitan.train \
        --module torchtitan_permshard --config llama3_debugmodel_permshard

(with this folder on ``PYTHONPATH``). The data path is Megatron's ``--data-path``: token
files or ``.bin``/``.idx`` prefixes, weighted or not. Resume the checkpoint on any number
of ranks: the global stream continues exactly.
"""

import os

from torchtitan.models.llama3.config_registry import llama3_debugmodel

from permshard.torchtitan import ShardedDataLoader


def llama3_debugmodel_permshard():
    """llama3's debug model reading ``$PERMSHARD_DATA_PATH`` through permshard."""
    config = llama3_debugmodel()
    config.dataloader = ShardedDataLoader.Config(
        data_path=os.environ.get("PERMSHARD_DATA_PATH", ""), seed=0, num_workers=2
    )
    return config
