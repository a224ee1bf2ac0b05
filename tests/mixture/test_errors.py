from tokenmill.errors import UserError
from tokenmill.mixture.errors import MixtureError


def test_mixture_errors_are_user_errors_and_value_errors():
    assert issubclass(MixtureError, UserError) and issubclass(MixtureError, ValueError)
