"""groupsparse: do transformers learn optimal variable selection in group-sparse classification?"""

__version__ = "0.1.0"
