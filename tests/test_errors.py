from tokenmill.config import ConfigError
from tokenmill.errors import UserError
from tokenmill.train.checkpoint import CheckpointError
from tokenmill.train.trainer import TrainError, TrainingDiverged


def test_user_facing_errors_share_the_base_the_cli_catches():
    for cls in (ConfigError, TrainError, TrainingDiverged, CheckpointError):
        assert issubclass(cls, UserError)
    assert not issubclass(KeyError, UserError)
