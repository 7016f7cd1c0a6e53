"""An installed app whose ``flows`` module the registry discovers."""
